"""Where the work happens: the dispatcher, the tmux runner, harnesses, checkouts, closing, prompts."""
