"""Where the code goes after a hand-off: the contract a code host (GitHub, GitLab) implements
for the daemon's pull requests, and the steps built on it (`contract`)."""
