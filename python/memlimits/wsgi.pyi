from typing import Any, Callable, Iterable, Union

Size = Union[int, str, None]

class LimitMiddleware:
    def __init__(self, app: Callable[..., Iterable[bytes]], held: Size = ...,
                 alloc: Size = ..., status: Union[int, str] = ...,
                 global_limit: bool = ...) -> None: ...
    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]: ...
