"""A subscription's message buffer: runs in, messages or runs out, bounded by messages,
the end after everything; checked against a list model with hypothesis."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.client.buffer import EMPTY, MessageBuffer
from spool.server.protocol.message import Delivery

END = object()


def msg(n: int) -> Delivery:
    return Delivery("t", b"%d" % n, ("s",))


def test_a_full_buffer_holds_the_writer_until_the_reader_makes_room() -> None:
    async def scenario() -> None:
        buf = MessageBuffer(3)
        await buf.put_run([msg(0), msg(1)])
        await buf.put_run([msg(2), msg(3)])  # admitted whole: 4 > 3
        assert buf.full() and buf.qsize() == 4
        writer = asyncio.create_task(buf.put_run([msg(4)]))
        await asyncio.sleep(0)
        assert not writer.done()
        assert buf.take() is not EMPTY  # 3 left: still full
        await asyncio.sleep(0)
        assert not writer.done()
        batch = await buf.get_batch()  # the rest of the first run
        assert [m.data for m in batch] == [b"1"]  # type: ignore[attr-defined]
        await asyncio.wait_for(writer, 1)
        assert buf.qsize() == 3

    asyncio.run(scenario())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.integers(min_value=1, max_value=4)),
            st.tuples(st.sampled_from(["take", "get", "batch"]), st.just(0)),
        ),
        max_size=30,
    )
)
def test_the_buffer_behaves_like_a_list_of_runs(ops: list[tuple[str, int]]) -> None:
    async def scenario() -> None:
        buf = MessageBuffer(0)  # unbounded: the model has no bound
        model: list[list[int]] = []
        counter = 0
        for op, n in ops:
            if op == "put":
                run = list(range(counter, counter + n))
                counter += n
                await buf.put_run([msg(i) for i in run])
                model.append(run)
                continue
            if not model:
                assert buf.take() is EMPTY
                continue
            if op == "batch":
                got = await buf.get_batch()
                assert [int(m.data) for m in got] == model.pop(0)  # type: ignore[attr-defined]
            else:
                got1 = buf.take() if op == "take" else await buf.get()
                assert int(got1.data) == model[0].pop(0)  # type: ignore[attr-defined]
                if not model[0]:
                    model.pop(0)
            assert buf.qsize() == sum(len(r) for r in model)
        buf.put_end(END)
        rest = []
        while (item := await buf.get()) is not END:
            rest.append(int(item.data))  # type: ignore[attr-defined]
        assert rest == [i for r in model for i in r]

    asyncio.run(scenario())
