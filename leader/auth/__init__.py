"""Authentication: hashed API tokens with roles, the bootstrap admin token and the follower join token."""
