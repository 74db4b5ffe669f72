"""The plan sidecar: a superset of OpenCrabs' plan JSON (DESIGN.md §4).

Unknown root and task fields are kept (``extra="allow"``) and written back unchanged.
Task ids are strings: OpenCrabs writes UUIDs; plangate mints ``"1"``, ``"2"``, ... from
``next_task_id`` and never reuses one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PlanStatus = Literal["Editing", "Active"]
TaskStatus = Literal["pending", "in_progress", "completed", "deferred"]
TaskSource = Literal["plan", "agent"]


class PlanIdentity(BaseModel):
    """The strict identity of a seeded plan task (spec/plan-reconciliation.md)."""

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


class PlanFlow(BaseModel):
    """Telegram message ids of the plan card and the plan-text messages."""

    model_config = ConfigDict(extra="allow")

    chat_id: int | None = None
    thread_id: int | None = None
    card_id: int | None = None
    review_ids: list[int] = Field(default_factory=list)


class PlanRevising(BaseModel):
    """An Active plan's checklist kept aside while the owner revises it (DESIGN.md §14)."""

    model_config = ConfigDict(extra="allow")

    plan_id: str
    tasks: list[PlanTask]
    approved_at: str | None = None


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
