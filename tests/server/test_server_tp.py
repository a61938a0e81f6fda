"""test_server_tp.py - `muse serve` under tensor parallelism: `mpirun -np 2 muse serve --tp 2` on
loopback answers the official `openai` client, with continuous batching over two slots, and gives
the same greedy replies as `muse chat` at tp 2 (the trained model, whose replies are real sentences;
the exact kernels on both sides); a repeated prompt reuses the slot's cache (truncate and checkpoints travel to rank 1
as commands); a grammar holds; SIGTERM to rank 0 ends every rank with status 0."""
import concurrent.futures
import os
import pathlib
import signal
import subprocess
import time

from srvtest import MUSE, check, ensure_venv, report
from test_server_real import RealServer

ensure_venv(["openai"])
import openai  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "models" / "glimmer-tiny-f16.gguf")
PROMPTS = ["Good morrow, my lord. How fares your father?", "What news from the court?"]
# a short MUSE_TP_TIMEOUT: the idle pause below must not be taken for a vanished rank 0 (heartbeats).
# MUSE_CPU=exact for the server and muse chat (both at tp 2) alike: with the fast kernels a row's
# sums depend on how its prompt was cut into steps, which depends on timing, and tp 2 against tp 1
# differs by the all-reduce's order (within test_tp.sh's bound): either turned a near-tie on a busy box.
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", MUSE_TP_TIMEOUT="2",
           MUSE_CPU="exact")


class TpServer(RealServer):
    def __init__(self, n, *args):  # noqa: D107 - RealServer launched by mpirun with --tp n
        super().__init__(MODEL, "--tp", str(n), "-t", "1", *args, env=ENV,
                         launcher=["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(n), "-x", "MUSE_TP_TIMEOUT", "-x", "MUSE_CPU"])

    def rank_pid(self, rank):
        """The pid of muse rank `rank` of this job (OMPI_COMM_WORLD_RANK in its environment)."""
        for d in pathlib.Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                env = (d / "environ").read_bytes().split(b"\0")
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env and str(self.port_file).encode() in cmd:
                return int(d.name)
        return None

    def __exit__(self, *exc):
        # the clean stop: SIGTERM to rank 0, which shuts down and tells rank 1 to quit (a signal to
        # mpirun makes the launcher end the job itself, with a nonzero status)
        pid = self.rank_pid(0)
        check(pid is not None, "rank 0's process found")
        if pid:
            os.kill(pid, signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = None
        check(rc == 0, f"every rank exits 0 after SIGTERM to rank 0 (mpirun: {rc}); log:\n{self.logtext()[-2000:]}")
        check(self.rank_pid(1) is None, "no rank left behind")
        self.log.close()
        self.dir.cleanup()


def chat_cli(p):
    """`muse chat` at tp 2 (the same all-reduce order as the server: the exact kernels make each
    reply one fixed computation, so the server's batching and caching must not change it)."""
    r = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", "-x", "MUSE_CPU", MUSE, "chat",
                        "-m", MODEL, "-p", p, "--temp", "0", "-n", "48", "-t", "1", "--tp", "2"],
                       capture_output=True, text=True, env=ENV)
    return r.stdout.strip()


def main():
    want = {p: chat_cli(p) for p in PROMPTS}
    check(all(want.values()), f"muse chat replies: {want}")
    with TpServer(2, "--parallel", "2", "--ctx-size", "1024") as srv:
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=120)

        def ask(p):
            r = cl.chat.completions.create(model="m", messages=[{"role": "user", "content": p}], max_tokens=48,
                                           temperature=0)
            return (r.choices[0].message.content or "").strip(), r

        with concurrent.futures.ThreadPoolExecutor(2) as ex:  # two slots in one batch
            got = dict(zip(PROMPTS, ex.map(ask, PROMPTS)))
        for p in PROMPTS:
            check(got[p][0] == want[p], f"tp 2 server {p!r}: {got[p][0]!r} == muse chat's (tp 2) {want[p]!r}")
        time.sleep(4)  # idle for twice MUSE_TP_TIMEOUT: rank 1 hears rank 0's heartbeats
        again, r = ask(PROMPTS[0])  # the slot's cached prefix: a truncate and a checkpoint on both ranks
        check(again == want[PROMPTS[0]], f"tp 2 server, the prompt again: {again!r}")
        st, _, js = srv.request("POST", "/completion", {"prompt": "What news from the court? Speak.", "n_predict": 8,
                                                         "temperature": 0})
        check(st == 200 and js.get("tokens_cached", 0) > 0, f"a shared prefix is reused: {st} {str(js)[:200]}")
        st, _, js = srv.request("POST", "/completion", {"prompt": "Is it day?", "n_predict": 4, "temperature": 0,
                                                         "grammar": 'root ::= "yes" | "no"'})
        check(st == 200 and js.get("content") in ("yes", "no"), f"a grammar holds under --tp: {st} {str(js)[:200]}")
        m = srv.metrics()
        check(m.get("muse_batch_shared_steps_total", 0) >= 1, f"the two requests shared steps: {m}")
    report("test_server_tp")


if __name__ == "__main__":
    main()
