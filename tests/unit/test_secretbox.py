"""SecretBox's cache of opened secrets: same answers as decrypting, bounded size."""

from __future__ import annotations

import pytest

from outbox._security import secretbox
from outbox._security.secretbox import SecretBox, generate_key
from outbox.errors import ConfigurationError


class _NoDecrypt:
    def decrypt(self, token: bytes) -> bytes:
        raise AssertionError("decrypted again")


def test_opening_twice_gives_the_secret_and_decrypts_once(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    box = SecretBox(generate_key())
    stored = box.seal("whsec_first")
    assert box.open(stored) == "whsec_first"
    monkeypatch.setattr(box, "_fernet", _NoDecrypt())
    assert box.open(stored) == "whsec_first"
    with pytest.raises(AssertionError, match="decrypted again"):
        box.open(SecretBox(generate_key()).seal("whsec_new"))


def test_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secretbox, "_OPENED_MAX", 5)
    box = SecretBox(generate_key())
    sealed = [box.seal(f"whsec_{i}") for i in range(12)]
    assert [box.open(s) for s in sealed] == [f"whsec_{i}" for i in range(12)]
    assert len(box._opened) <= 5


def test_a_wrong_key_is_not_cached_as_an_answer() -> None:
    stored = SecretBox(generate_key()).seal("whsec_other")
    box = SecretBox(generate_key())
    for _ in range(2):
        with pytest.raises(ConfigurationError, match="does not open"):
            box.open(stored)
