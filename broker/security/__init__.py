"""Who may do what: the ACL authorizer below both listeners (docs/security.md)."""
