import asyncio
import contextvars
from typing import Any, Awaitable, Callable, Optional, Union

from . import Task

Size = Union[int, str, None]
current_task: contextvars.ContextVar[Optional[Task]]

def run_in_task(coro: Awaitable[Any], task: Task) -> Awaitable[Any]: ...
def install_task_factory(loop: Optional[asyncio.AbstractEventLoop] = ...) -> None: ...

class LimitMiddleware:
    def __init__(self, app: Callable[..., Awaitable[None]], held: Size = ...,
                 alloc: Size = ..., status: int = ...,
                 global_limit: bool = ...) -> None: ...
    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any],
                       send: Callable[..., Any]) -> None: ...
