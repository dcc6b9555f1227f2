"""ACL as 4.9's PlainAccessValidator: rules.py (the IO-free check), edits.py (the admin requests' changes
to plain_acl.yml, IO-free), service.py (the file on Twisted, reloaded while the broker runs)."""
