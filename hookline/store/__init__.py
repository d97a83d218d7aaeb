"""Redis state: one class per structure (endpoints, dead letters, attempt history, the retry
schedule), the gates that read several of them, and every key named in ``keys``."""
