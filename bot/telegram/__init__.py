"""The Telegram front end: the wire (python-telegram-bot's Application, the outbox, updates),
its presentation (cards, HTML rendering) and access (who may do what in a chat)."""
