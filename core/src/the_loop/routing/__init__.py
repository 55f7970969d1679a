"""What an event means: the router's decision chain, the control keywords and their claims."""
