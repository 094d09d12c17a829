"""compass.logs: third-party INFO stays off the console unless verbose, and always reaches the log file."""
from __future__ import annotations

import importlib
import io
import logging
import sys

import pytest

from compass import logs

THIRD_PARTY = ("mergekit.merge", "transformers.modeling_utils", "ray.worker", "datasets.builder",
               "urllib3.connectionpool", "botocore.credentials", "prefect.flow_runs")


@pytest.fixture
def fresh_logging(tmp_path, monkeypatch):
    """Run setup_logging on a clean slate and put every logger it touched back afterwards."""
    monkeypatch.delenv("COMPASS_VERBOSE", raising=False)
    monkeypatch.delenv("COMPASS_LOG_LEVEL", raising=False)
    monkeypatch.setenv("COMPASS_LOG_DIR", str(tmp_path / "logs"))
    names = ("", "compass", *logs.CHATTY, *logs.ADOPTED, *THIRD_PARTY, "fake_noisy_lib")
    saved = {n: (logging.getLogger(n).level, logging.getLogger(n).propagate, list(logging.getLogger(n).handlers))
             for n in names}
    meta_path = list(sys.meta_path)
    # a clean slate even after other tests set up logging in this process (Prefect's handlers included)
    root = logging.getLogger()
    foreign = [h for h in root.handlers if not getattr(h, "_compass", False)]
    for h in foreign:
        root.removeHandler(h)
    for n in (*logs.ADOPTED, *THIRD_PARTY):
        lg = logging.getLogger(n)
        lg.handlers[:] = []
        lg.setLevel(logging.NOTSET)
        lg.propagate = True

    def setup(**kw):
        path = logs.setup_logging(**kw)
        console = next(h for h in logging.getLogger().handlers
                       if getattr(h, "_compass", False) and not isinstance(h, logging.FileHandler))
        buf = io.StringIO()
        console.setStream(buf)
        return buf, path

    yield setup
    for h in [h for h in root.handlers if getattr(h, "_compass", False)]:
        root.removeHandler(h)
        h.close()
    for n, (level, propagate, handlers) in saved.items():
        lg = logging.getLogger(n)
        lg.setLevel(level)
        lg.propagate = propagate
        if n:
            lg.handlers[:] = handlers
    root.handlers[:] = [*foreign, *[h for h in root.handlers if h not in foreign]]
    sys.meta_path[:] = meta_path
    sys.modules.pop("fake_noisy_lib", None)


def _emit():
    for name in THIRD_PARTY:
        logging.getLogger(name).info("INFO from %s", name)
    logging.info("INFO on the root logger (mergekit's style)")
    logging.getLogger("mergekit.merge").warning("WARNING from mergekit")
    logging.getLogger("compass.runner").info("INFO of ours")
    logging.getLogger("compass.merge").debug("DEBUG of ours")


def test_third_party_info_stays_off_the_console_by_default(fresh_logging, tmp_path):
    buf, path = fresh_logging(log_file=logs.new_log_file("run"))
    _emit()
    console = buf.getvalue()
    for name in THIRD_PARTY:
        assert f"INFO from {name}" not in console
    assert "root logger" not in console
    assert "WARNING from mergekit" in console            # warnings always show
    assert "INFO of ours" in console
    assert "DEBUG of ours" not in console
    assert path.parent == tmp_path / "logs" and path.name.startswith("run-")


def test_verbose_lets_third_party_info_onto_the_console(fresh_logging):
    buf, _ = fresh_logging(verbose=True)
    _emit()
    console = buf.getvalue()
    for name in THIRD_PARTY:
        assert f"INFO from {name}" in console
    assert "root logger" in console and "INFO of ours" in console


def test_verbose_from_the_environment(fresh_logging, monkeypatch):
    monkeypatch.setenv("COMPASS_VERBOSE", "1")
    buf, _ = fresh_logging()
    logging.getLogger("mergekit.merge").info("shown")
    assert "shown" in buf.getvalue()


@pytest.mark.parametrize("verbose", [False, True])
def test_the_log_file_always_gets_everything(fresh_logging, tmp_path, verbose):
    _, path = fresh_logging(verbose=verbose, log_file=tmp_path / "run.log")
    _emit()
    for h in logging.getLogger().handlers:
        h.flush()
    text = path.read_text()
    for name in THIRD_PARTY:
        assert f"INFO from {name}" in text
    for line in ("root logger", "WARNING from mergekit", "INFO of ours", "DEBUG of ours"):
        assert line in text


def test_a_second_setup_replaces_the_handlers(fresh_logging, tmp_path):
    fresh_logging(log_file=tmp_path / "a.log")
    fresh_logging(log_file=tmp_path / "b.log")
    ours = [h for h in logging.getLogger().handlers if getattr(h, "_compass", False)]
    assert len(ours) == 2
    assert [h.baseFilename for h in ours if isinstance(h, logging.FileHandler)] == [str(tmp_path / "b.log")]


def test_a_library_with_its_own_stderr_handler_is_adopted_on_import(fresh_logging, tmp_path, monkeypatch):
    """Ray and transformers install their own stderr handler and stop propagation at import;
    such a logger is routed through ours as its import finishes."""
    (tmp_path / "fake_noisy_lib.py").write_text(
        "import logging, sys\n"
        "_h = logging.StreamHandler(sys.stderr)\n"
        "log = logging.getLogger('fake_noisy_lib')\n"
        "log.addHandler(_h); log.setLevel(logging.INFO); log.propagate = False\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(logs, "ADOPTED", (*logs.ADOPTED, "fake_noisy_lib"))
    buf, path = fresh_logging(log_file=tmp_path / "run.log")
    mod = importlib.import_module("fake_noisy_lib")
    lg = logging.getLogger("fake_noisy_lib")
    assert mod._h not in lg.handlers and lg.propagate
    lg.info("INFO from a noisy library")
    lg.warning("WARNING from a noisy library")
    for h in logging.getLogger().handlers:
        h.flush()
    assert "INFO from a noisy library" not in buf.getvalue()
    assert "WARNING from a noisy library" in buf.getvalue()
    assert "INFO from a noisy library" in path.read_text()


def test_datasets_info_reaches_the_log_file_and_its_warnings_print_once(fresh_logging, tmp_path):
    """datasets adds its own stderr handler and holds its logger at WARNING: adopted, its INFO goes
    to the log file and a warning shows once on the console (not twice through two handlers)."""
    import datasets  # noqa: F401  (adopted only once imported)
    own = logging.getLogger("datasets")                  # what datasets does to it at import
    own.addHandler(logging.StreamHandler(io.StringIO()))
    own.setLevel(logging.WARNING)
    buf, path = fresh_logging(log_file=tmp_path / "run.log")
    assert own.handlers == [] and own.level == logging.NOTSET
    lg = logging.getLogger("datasets.builder")
    lg.info("INFO from datasets")
    lg.warning("WARNING from datasets")
    for h in logging.getLogger().handlers:
        h.flush()
    assert "INFO from datasets" in path.read_text()
    assert "INFO from datasets" not in buf.getvalue()
    assert buf.getvalue().count("WARNING from datasets") == 1
