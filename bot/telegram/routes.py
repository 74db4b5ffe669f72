"""Where a session lives in Telegram: its chat key and the bot's small durable state.

A session's key on Telegram is ``(chat_id, message_thread_id or 0)`` (``bot.telegram.keys``,
docs/architecture.md). Its route (session -> chat) is kept by the route store every channel
shares (:mod:`bot.routes`), from the updates seen; the sidecar's ``flow`` is a second source
(see ``presenter``).

Meta keys written by the Telegram front end (all prefixed ``telegram.``)::

    telegram.last_update_id          the update_id watermark: all at or below it were processed
    telegram.recent_updates          JSON {"ids": [...], "date": t}: the latest processed ids and
                                     the newest update date (only re-deliveries are dropped)
    telegram.route.<session_id>      "<chat_id>:<thread_id>"
    telegram.goal_card.<session_id>  "<chat_id>:<message_id>" of the goal card
    telegram.review_rev.<session_id> "<plan id>:<revision>" whose text was last posted for review
    telegram.groups                  JSON sorted list of the chat ids of groups an owner added
                                     the bot to
"""

from __future__ import annotations

# The route store is every channel's (bot.routes); Telegram's code names it from here too.
from bot.routes import ChatRoute as ChatRoute
from bot.routes import MetaStore as MetaStore
from bot.routes import Routes as Routes
from bot.routes import route_key as route_key

LAST_UPDATE_KEY = "telegram.last_update_id"
RECENT_UPDATES_KEY = "telegram.recent_updates"


def goal_card_key(session_id: str) -> str:
    """Where homes from before the engine kept the goal card's id had it (read once, then
    moved into the engine: bot.telegram.presenter)."""
    return f"telegram.goal_card.{session_id}"


def review_rev_key(session_id: str) -> str:
    return f"telegram.review_rev.{session_id}"


def patch_key(session_id: str) -> str:
    """The finished plan whose ``.patch`` document was posted (at most once per plan)."""
    return f"telegram.patch.{session_id}"


GROUPS_KEY = "telegram.groups"
