"""Tasks: prompts + reference answers, split into train and held-out samples."""

from aha.errors import TaskError
from aha.prompts import chat_messages, encode_prompts
from aha.tasks.base import Task, build_task, check_answers
from aha.tasks.sampler import PromptSampler

__all__ = ["Task", "TaskError", "build_task", "check_answers", "chat_messages", "encode_prompts", "PromptSampler"]
