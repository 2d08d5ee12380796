"""Sending notices to the channels `notify:` configures (`symphony.config.notify`): the
message a batch of deliveries becomes (`message`), and one sender per channel kind
(`channels`). What is sent when is decided in `symphony.core.notifications`; the daemon's
`symphony.daemon.notify` drives it from the store's outbox."""

from symphony.base.errors import SymphonyError


class NotifyError(SymphonyError):
    """A channel refused or could not take a message; the delivery is tried again later."""
