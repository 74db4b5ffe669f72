"""The plan sidecar: a superset of OpenCrabs' plan JSON (docs/plan-json-spec.md).

Unknown root and task fields are kept (``extra="allow"``) and written back unchanged.
Task ids are strings: OpenCrabs writes UUIDs; plangate mints ``"1"``, ``"2"``, ... from
``next_task_id`` and never reuses one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engine.checks.types import CheckResult
from engine.keys import ChatKey, LegacyMessageKey, LegacyPersonKey, legacy_chat
from engine.tools.plan_view import PlanState as PlanState

PlanStatus = Literal["Editing", "Active"]
TaskStatus = Literal["pending", "in_progress", "completed", "deferred"]
TaskSource = Literal["plan", "agent"]


class PlanIdentity(BaseModel):
    """The strict identity of a seeded plan task (docs/extraction.md)."""

    model_config = ConfigDict(frozen=True)

    version: Literal[1] = 1
    heading_path: list[str]
    work_body: str


class PlanProvenance(BaseModel):
    """Where a carried task's state came from."""

    model_config = ConfigDict(frozen=True)

    plan_id: str
    task_id: str


class PlanTask(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    order: int = 0
    title: str
    description: str = ""
    task_type: str | None = None
    dependencies: list[str] = Field(default_factory=list)
    complexity: int | None = None
    acceptance_criteria: list[str] = Field(default_factory=list)
    status: TaskStatus = "pending"
    notes: str | None = None
    retry_count: int = 0
    # plangate's own fields
    source: TaskSource = "plan"
    plan_identity: PlanIdentity | None = None
    plan_provenance: PlanProvenance | None = None
    evidence: str | None = None
    reason: str | None = None
    # Commands that must pass before the task completes (docs/checks.md), and plangate's
    # record of the passing run that completed it.
    checks: list[str] = Field(default_factory=list)
    check_results: list[CheckResult] = Field(default_factory=list)


class PlanFlow(BaseModel):
    """Where the plan card and the plan-text messages are: the channel's keys for them.

    ``chat_id`` is the chat's room (a thread's parent, ``engine.keys.Chat.room``),
    ``thread_id`` the thread's own chat key (``None`` outside a thread), ``card_id`` and
    ``review_ids`` the channel's message keys. A sidecar written before keys were strings
    holds integers here; they load as keys of ``engine.keys.LEGACY_CHANNEL``.
    """

    model_config = ConfigDict(extra="allow")

    chat_id: ChatKey | None = None
    thread_id: ChatKey | None = None
    card_id: LegacyMessageKey | None = None
    review_ids: list[LegacyMessageKey] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _legacy_ids(cls, data: object) -> object:
        """Integer chat and thread ids (older sidecars) as the chat keys they named."""
        if not isinstance(data, dict):
            return data
        chat, thread = data.get("chat_id"), data.get("thread_id")
        if isinstance(chat, int) and not isinstance(chat, bool):
            data = dict(data)
            number = thread if isinstance(thread, int) and not isinstance(thread, bool) else 0
            data["chat_id"] = legacy_chat(chat).key
            data["thread_id"] = legacy_chat(chat, number).key if number else None
        elif isinstance(thread, int):
            data = {**data, "thread_id": None}  # a thread of no known chat names nothing
        return data


class PlanApproval(BaseModel):
    """One person's approval of a plan: who (their key and the name shown) and when
    (ISO 8601 UTC). ``approved_by`` lists them in the order they were given."""

    model_config = ConfigDict(extra="allow")

    user_id: LegacyPersonKey | None = None
    name: str = ""
    at: str = ""


def _approvals(value: object) -> object:
    """``approved_by`` as a list: an older sidecar kept one user id (or null) there."""
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [{"user_id": value}]
    return value


class PlanRevising(BaseModel):
    """An Active plan's checklist kept aside while the owner revises it (docs/plan-lifecycle.md)."""

    model_config = ConfigDict(extra="allow")

    plan_id: str
    tasks: list[PlanTask]
    approved_at: str | None = None
    approved_by: list[PlanApproval] = Field(default_factory=list)
    # The approved .md text, restored when the revision is discarded.
    md: str | None = None
    mode: Literal["design", "checklist", "import"] | None = None


MAX_PAUSES = 20


class PlanPause(BaseModel):
    """One time the approved run stopped by itself (the ``run/paused`` event, kept here so
    the archived plan shows it): why, the stuck pattern and its evidence, the task."""

    model_config = ConfigDict(extra="allow")

    kind: str
    text: str
    pattern: str | None = None
    evidence: str = ""
    task_id: str | None = None
    at: str = ""


class PlanSidecar(BaseModel):
    """The live plan JSON. ``status`` is canonical (``Editing``/``Active``) once loaded."""

    model_config = ConfigDict(extra="allow")

    id: str
    session_id: str
    title: str = ""
    description: str = ""
    status: PlanStatus = "Editing"
    tasks: list[PlanTask] = Field(default_factory=list)
    created_at: str = ""
    updated_at: str = ""
    approved_at: str | None = None
    pre_init_editing: bool = False
    working_directory: str | None = None
    # plangate's own fields
    revision: int = 0
    mode: Literal["design", "checklist", "import"] | None = None
    next_task_id: int = 1
    revising: PlanRevising | None = None
    flow: PlanFlow = Field(default_factory=PlanFlow)
    # Who approved it and when (docs/roles.md); kept in the archive.
    approved_by: list[PlanApproval] = Field(default_factory=list)
    # The revision the agent last submitted for review; the card shows review while it equals
    # ``revision`` (an .md write bumps the revision and ends the review).
    submitted_revision: int | None = None
    # The whole plan's checks (its ``## Checks`` section), run before the last task completes,
    # and the passing run's record (docs/checks.md).
    checks: list[str] = Field(default_factory=list)
    check_results: list[CheckResult] = Field(default_factory=list)
    # SHA-256 of every file the checks watch, taken at approval; and the watched files that
    # differed at the last completion ("changed tests" on the Done card).
    check_baseline: dict[str, str] | None = None
    changed_tests: list[str] = Field(default_factory=list)
    # The run's stops, oldest first (at most MAX_PAUSES kept).
    pauses: list[PlanPause] = Field(default_factory=list)

    _approved_by = field_validator("approved_by", mode="before")(_approvals)


# --- derived state and the legacy load map (docs/plan-json-spec.md) -------

# The derived lifecycle state (NoPlan, Editing pre-init, Editing post-init, Active) is defined
# with the plan view the tools read (engine.tools.plan_view): PlanState.


def is_editing(state: PlanState) -> bool:
    """The plan is in Editing (before or after ``plan init``): plan mode is on."""
    return state in ("pre_init", "post_init")


LegacyDisposition = Literal["live", "archive_completed", "archive_discarded"]
"""What loading a sidecar asks for: keep it live, or archive it (and the session is NoPlan)."""

_ROOT_STATUS_MAP: dict[str, PlanStatus | LegacyDisposition] = {
    "editing": "Editing",
    "draft": "Editing",
    "pendingapproval": "Editing",
    "rejected": "Editing",
    "active": "Active",
    "approved": "Active",
    "inprogress": "Active",
    "completed": "archive_completed",
    "cancelled": "archive_discarded",
    "canceled": "archive_discarded",
}

_TASK_STATUS_MAP: dict[str, TaskStatus] = {
    "pending": "pending",
    "inprogress": "in_progress",
    "completed": "completed",
    "skipped": "deferred",
    "deferred": "deferred",
}

LEGACY_TASK_STATUS_FIELD = "legacy_status"
"""Extra task field that keeps an unknown original status string (mapped to pending)."""


def _status_key(value: str) -> str:
    # "InProgress", "in_progress", "in-progress" and "In Progress" are one status.
    return "".join(ch for ch in value.lower() if ch.isalnum())


def map_task_status(raw: object) -> tuple[TaskStatus, str | None]:
    """Map a stored task status case-insensitively; unknown -> ``pending`` plus the original."""
    if not isinstance(raw, str):
        return "pending", None if raw is None else str(raw)
    mapped = _TASK_STATUS_MAP.get(_status_key(raw))
    if mapped is None:
        return "pending", raw
    return mapped, None


def map_root_status(raw: object) -> tuple[PlanStatus, LegacyDisposition]:
    """Map a stored plan status (canonical or one of OpenCrabs' seven legacy strings).

    ``Completed`` and ``Cancelled`` ask the caller to archive (completed / discarded); an
    unknown or missing status loads as Editing, which can never run a checklist.
    """
    mapped = _ROOT_STATUS_MAP.get(_status_key(raw)) if isinstance(raw, str) else None
    if mapped == "Active":
        return "Active", "live"
    if mapped in ("archive_completed", "archive_discarded"):
        return "Active", mapped
    return "Editing", "live"


def _decode_task(raw: object) -> object:
    if not isinstance(raw, dict):
        return raw
    data = dict(raw)
    status, original = map_task_status(data.get("status"))
    data["status"] = status
    if original is not None and LEGACY_TASK_STATUS_FIELD not in data:
        data[LEGACY_TASK_STATUS_FIELD] = original
    # OpenCrabs writes UUID (or numeric) ids and dependencies; plangate keeps them as strings.
    for key in ("id",):
        if isinstance(data.get(key), int):
            data[key] = str(data[key])
    deps = data.get("dependencies")
    if isinstance(deps, list):
        data["dependencies"] = [str(d) if isinstance(d, int) else d for d in deps]
    if data.get("dependencies") is None:
        data["dependencies"] = []
    if data.get("acceptance_criteria") is None:
        data["acceptance_criteria"] = []
    if data.get("description") is None:
        data["description"] = ""
    return data


class DecodedSidecar(BaseModel):
    """A loaded sidecar plus what the legacy map asks the loader to do with it."""

    sidecar: PlanSidecar
    disposition: LegacyDisposition = "live"
    original_status: str | None = None


LEGACY_EDITING_TASKS_FIELD = "legacy_editing_tasks"
"""Extra root field that keeps the tasks of a legacy plan that maps to Editing."""


def decode_sidecar(data: object) -> DecodedSidecar:
    """Validate stored sidecar JSON, applying the legacy status and task maps.

    Raises ``pydantic.ValidationError`` (or ``ValueError``) when the data is not a sidecar;
    the store then moves the file aside as corrupt. Editing never holds a checklist, so the
    tasks of a legacy Editing plan move to the extra root field ``legacy_editing_tasks``.
    """
    if not isinstance(data, dict):
        raise ValueError("a plan sidecar must be a JSON object")
    raw = dict(data)
    original = raw.get("status")
    status, disposition = map_root_status(original)
    raw["status"] = status
    tasks = raw.get("tasks")
    if tasks is None:
        tasks = []
    if not isinstance(tasks, list):
        raise ValueError("tasks must be a list")
    raw["tasks"] = [_decode_task(t) for t in tasks]
    if raw.get("description") is None:
        raw["description"] = ""
    if raw.get("title") is None:
        raw["title"] = ""
    if raw.get("pre_init_editing") is None:
        raw["pre_init_editing"] = False
    if raw.get("flow") is None:
        raw.pop("flow", None)
    if isinstance(raw.get("id"), int):
        raw["id"] = str(raw["id"])
    sidecar = PlanSidecar.model_validate(raw)
    if status == "Editing" and sidecar.tasks and disposition == "live":
        kept = [t.model_dump(mode="json") for t in sidecar.tasks]
        extra = dict(sidecar.model_extra or {})
        extra.setdefault(LEGACY_EDITING_TASKS_FIELD, kept)
        sidecar = sidecar.model_copy(update={"tasks": []})
        if sidecar.model_extra is not None:
            sidecar.model_extra[LEGACY_EDITING_TASKS_FIELD] = extra[LEGACY_EDITING_TASKS_FIELD]
    # Next id after every numeric id already present, so a minted id is never reused.
    numeric = [int(t.id) for t in sidecar.tasks if t.id.isdigit()]
    if numeric and sidecar.next_task_id <= max(numeric):
        sidecar = sidecar.model_copy(update={"next_task_id": max(numeric) + 1})
    return DecodedSidecar(
        sidecar=sidecar,
        disposition=disposition,
        original_status=original if isinstance(original, str) else None,
    )


def encode_sidecar(sidecar: PlanSidecar) -> str:
    """The sidecar as written to disk: canonical status, unknown fields kept, stable layout."""
    return sidecar.model_dump_json(indent=2) + "\n"


def derive_state(sidecar: PlanSidecar | None, *, md_exists: bool) -> PlanState:
    """NoPlan / pre-init / post-init / Active from the live sidecar and the ``.md``'s presence.

    An ``.md`` next to a pre-init sidecar means post-init (docs/plan-lifecycle.md).
    """
    if sidecar is None:
        return "none"
    if sidecar.status == "Active":
        return "active"
    if sidecar.pre_init_editing and not md_exists:
        return "pre_init"
    return "post_init"
