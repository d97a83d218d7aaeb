"""A minimal Flask app that sends ``order.created`` webhooks with Hookline: see ``app.py``."""
