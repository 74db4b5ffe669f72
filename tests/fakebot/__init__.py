"""A small, honest fake of the Telegram Bot API for tests (aiohttp on loopback)."""
