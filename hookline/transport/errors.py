"""kombu's exceptions that the layers above the transport catch, named here so that only the
transport imports kombu: a publish whose arguments cannot be encoded (``EncodeError``), a
broker that cannot be reached (``OperationalError``), and any of kombu's (``KombuError``)."""

from kombu.exceptions import EncodeError, KombuError, OperationalError

__all__ = ["EncodeError", "KombuError", "OperationalError"]
