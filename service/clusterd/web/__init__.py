"""The read-only web dashboard and its JSON API, served by clusterd (see app.py and server.py)."""
