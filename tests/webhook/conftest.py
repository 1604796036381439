import pytest

from webhook_harness import Emulator, Webhook


@pytest.fixture
def emulator(tmp_path):
    emu = Emulator(tmp_path)
    yield emu
    emu.stop()


@pytest.fixture
def start_webhook(tmp_path):
    """start_webhook(emulator, shards=3, extra=[...]) → a running webhook, stopped after the test."""
    started = []

    def start(emu, **kwargs):
        hook = Webhook(tmp_path, emu, **kwargs)
        started.append(hook)
        return hook

    yield start
    for hook in started:
        hook.stop()
