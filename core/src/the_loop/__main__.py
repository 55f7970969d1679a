"""`python -m the_loop` runs the CLI, for core-only installs and for the daemons `start` spawns."""

from the_loop.cli import main

if __name__ == "__main__":
    main()
