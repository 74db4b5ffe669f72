"""Usage accounting: tokens and cost of every model call, and the token limits (docs/goals.md)."""
