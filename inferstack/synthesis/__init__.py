"""How the app synthesizes many stacks: sharding the work over processes."""
