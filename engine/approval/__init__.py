"""Tool approvals: the policy (pure) and the gate that asks the owner from the chat."""
