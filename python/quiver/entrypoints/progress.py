"""ProgressBar: a small stand-in for tqdm (which may not be installed), with the subset
of its interface LLM.generate uses: update(), set_postfix_str(), close()."""

import sys
import time
from typing import IO, Optional

_WIDTH = 25
_REFRESH_S = 0.1


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class ProgressBar:
    """`desc: 42%|██████▌        | 5/12 [00:01<00:02, 3.10it/s, postfix]` on one line."""

    def __init__(self, total: int, desc: str = "", file: Optional[IO[str]] = None) -> None:
        self.total = total
        self.desc = desc
        self.n = 0
        self._postfix = ""
        self._file = file if file is not None else sys.stderr
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._closed = False
        self._draw()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last_draw >= _REFRESH_S or self.n >= self.total:
            self._draw()

    def set_postfix_str(self, s: str, refresh: bool = False) -> None:
        self._postfix = s
        if refresh:
            self._draw()

    def line(self) -> str:
        elapsed = time.monotonic() - self._start
        frac = self.n / self.total if self.total else 1.0
        filled = frac * _WIDTH
        full = int(filled)
        partial = " ▏▎▍▌▋▊▉"[int((filled - full) * 8)] if full < _WIDTH else ""
        bar = ("█" * full + partial).ljust(_WIDTH)
        rate = self.n / elapsed if elapsed > 0 else 0.0
        remaining = (self.total - self.n) / rate if rate > 0 else 0.0
        postfix = f", {self._postfix}" if self._postfix else ""
        return (f"{self.desc}: {100 * frac:3.0f}%|{bar}| {self.n}/{self.total} "
                f"[{_clock(elapsed)}<{_clock(remaining)}, {rate:.2f}it/s{postfix}]")

    def _draw(self) -> None:
        self._last_draw = time.monotonic()
        self._file.write("\r" + self.line())
        self._file.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._draw()
            self._file.write("\n")
            self._file.flush()
