"""A TCP proxy on loopback that can go silent like a partition, for tests without root.

    with StallingProxy(("127.0.0.1", port_b)) as proxy:
        ... dial 127.0.0.1:proxy.port instead of B ...
        proxy.stall()     # nothing crosses any more, in either direction
        proxy.resume()    # connections still open flow again; new ones are forwarded

While stalled the proxy forwards nothing (what its reads in progress take is held, like
packets in flight) and holds new connections before their first byte: to both ends every connection through it is silent, and a sender's
writes block once the socket buffers are full, as when a partition drops every packet
and TCP retransmits quietly. (The kernels still acknowledge what reaches their buffers,
so nothing times out at the TCP level either: only the application can notice.)

The proxy runs its own event loop in a thread, so it keeps its behaviour whatever the
test's own loop does.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

__all__ = ["StallingProxy"]


class StallingProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; see the module docstring."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._flowing = asyncio.Event()
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, name="stalling-proxy", daemon=True)

    def __enter__(self) -> StallingProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def stall(self) -> None:
        """From now on nothing crosses (returns once the proxy applied it)."""
        self._call(self._flowing.clear)

    def resume(self) -> None:
        """Bytes cross again."""
        self._call(self._flowing.set)

    def close(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def _call(self, fn: object) -> None:
        assert callable(fn)
        done = threading.Event()

        def apply() -> None:
            fn()
            done.set()

        self._loop.call_soon_threadsafe(apply)
        if not done.wait(10):
            raise RuntimeError("the proxy's loop does not answer")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._flowing.set()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accepted, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._flowing.wait()
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                writer.close()
                return
            self.connections += 1
            await asyncio.gather(
                self._pump(reader, up_writer), self._pump(up_reader, writer),
                return_exceptions=True,
            )  # fmt: skip
        except asyncio.CancelledError:
            writer.close()  # the proxy closes (ends quietly: asyncio's stream callback
            # logs a connection task that ends cancelled)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One direction: read only while flowing, and hold what was read while stalled."""
        try:
            while True:
                await self._flowing.wait()
                data = await reader.read(1 << 16)
                if not data:
                    break
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
