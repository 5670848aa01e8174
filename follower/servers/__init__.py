"""Model servers benchfleet runs itself (as separate processes)."""
