"""The follower agent: runs benchmark jobs on one host and reports to the leader."""
