"""What travels on the queues, as typed models (Powertools Parser / pydantic): pointers only, never bodies.

A body that does not validate is not a message we can ever process: the runner parks it in the DLQ.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from chalicelib.domain.progress import IMAGE_SPAN_PREFIX
from chalicelib.domain.types import StageMessage


class StageMessageModel(BaseModel):
    """A main-stage message (docreader, chunking, embedding)."""

    model_config = ConfigDict(extra="ignore")

    tenant_id: str
    knowledge_id: str = Field(min_length=1, max_length=200)
    attempt: int = Field(ge=1)
    #: times the stage was put back on its queue because a provider throttled (not a failed try)
    deferrals: int = Field(default=0, ge=0)
    #: where a sliced stage resumes
    offset: int = Field(default=0, ge=0)
    #: docreader: a page range of a large PDF, or the step that puts the ranges together
    page_start: int = Field(default=0, ge=0)
    page_end: int = Field(default=0, ge=0)
    assemble: bool = False
    #: embedding: the last chunk id earlier slices read (absent in messages from before issue 12's cursor)
    cursor: str = Field(default="", max_length=400)
    #: embedding fan-out: the plan's generation, its slices, this slice and the slice size (sequence numbers)
    plan: int = Field(default=0, ge=0)
    slices: int = Field(default=0, ge=0)
    slice_index: int = Field(default=0, ge=0)
    slice_size: int = Field(default=0, ge=0)
    slice_stride: int = Field(default=0, ge=0)
    #: what earlier hand-overs of this slice counted (a few named integers)
    counts: dict[str, int] = Field(default_factory=dict, max_length=16)
    #: docreader: the turn at the pipeline's door a waiting document's message carries
    door_ticket: str = Field(default="", max_length=64)

    def to_domain(self) -> StageMessage:
        return StageMessage(
            self.tenant_id,
            self.knowledge_id,
            self.attempt,
            self.deferrals,
            self.offset,
            self.page_start,
            self.page_end,
            self.assemble,
            self.cursor,
            self.plan,
            self.slices,
            self.slice_index,
            self.slice_size,
            counts=dict(self.counts),
            slice_stride=self.slice_stride,
            door_ticket=self.door_ticket,
        )


class TaskMessageModel(BaseModel):
    """A state machine task sent with `.waitForTaskToken`: the token and the document's pointers. A task
    without a token (auto-tag, a summary refresh) is work outside the state machine's count."""

    model_config = ConfigDict(extra="ignore")

    task_token: str = ""
    tenant_id: str = ""
    knowledge_id: str = Field(min_length=1, max_length=200)
    attempt: int = Field(ge=1)
    #: how often a throttled or unavailable model sent this task back for later (runner.run_task)
    deferrals: int = Field(default=0, ge=0)


class ImageRef(BaseModel):
    index: int = Field(ge=0)
    url: str = Field(min_length=1)
    ocr_done: bool = False
    #: the uploaded file itself (an image upload): always read, whatever enable_multimodel says
    original: bool = False
    #: the sequence number of the text chunk its chunks are bound to (services.image_parents), found once
    #: for the document at the hand-over; None in messages from before it (the task looks it up)
    parent_seq: int | None = Field(default=None, ge=0)


class ImageTaskModel(TaskMessageModel):
    image: ImageRef

    @property
    def span_id(self) -> str:
        """The image's span under the multimodal stage (the worker's, and the timeout's when it never ran)."""
        return f"{IMAGE_SPAN_PREFIX}{self.image.index}]"


class Subtask(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    id_set: list[str] = Field(default_factory=list)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class SubtaskMessageModel(TaskMessageModel):
    subtask: Subtask

    @property
    def span_id(self) -> str:
        """The subtask's span under postprocess (the worker's, and the timeout's when it never ran)."""
        return f"postprocess.{self.subtask.id}"
