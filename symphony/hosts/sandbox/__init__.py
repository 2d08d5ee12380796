"""The boundary the daemon builds around what it starts for a ticket (`sandbox:` settings).

`policy` decides what a sandbox contains (mounts, program folders) without naming a program;
`bwrap` turns that into a bubblewrap command line; `proxy` is the way out for `network: model`
and the way in to the daemon's own servers; `home` fills the private home; `probe` says whether
a kind can start here; `host` makes all of it a `Host` of the host layer.
"""
