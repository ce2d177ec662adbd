"""`turncredit report`: the page's embedded data and escaping, the run-dir errors, the command,
and the page itself in headless Chromium (curves drawn, a clicked episode shows its turns)."""

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from turncredit.cli import main
from turncredit.episode import Episode, Task, Turn, write_episodes
from turncredit.report import write_report
from turncredit.report.run_data import collect

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SVG_NS = "http://www.w3.org/2000/svg"
# model output that would end the data <script> (and run its own) if it were embedded raw
INJECTED = "</script><script>document.documentElement.setAttribute('data-pwned', '1')</script>"
FIRST_ACTION = "Is it a kind of food? <script>alert(1)</script>"


def _turn(action: str, reply: str, reward: float, advantage: float | None, label: str) -> Turn:
    return Turn([1, 2, 3], [4, 5], [-0.1, -0.2], action, reply, reward, advantage=advantage, label=label)


def _episode(secret: str, turns: list[Turn], success: bool = False, aborted: bool = False,
             abort_reason: str = "") -> Episode:
    return Episode(Task(secret, {"secret": secret}), f"g-{secret}",
                   [{"role": "user", "content": f"Guess the word <{secret}>."}], turns,
                   outcome=float(success), success=success, aborted=aborted, abort_reason=abort_reason)


def make_run(root: Path) -> Path:
    """Three steps of a 20 Questions-like run: 2 won, 2 lost, 1 aborted episode."""
    run = root / "run"
    run.mkdir(parents=True)
    with (run / "metrics.jsonl").open("w") as f:
        for step in (1, 2, 3):
            f.write(json.dumps({
                "step": step, "reward_mean": 0.1 * step, "reward_std": 0.5, "success_rate": step / 4,
                "entropy": 1.0 / step, "approx_kl": 0.001 * step, "ref_kl": 0.0, "seconds_generate": 3.0,
                "seconds_oracle": 0.5, "seconds_update": 2.0, "faults_injected": step - 1,
                "grad_norm": math.nan if step == 2 else 1.5,  # a diverged value: logged as NaN
            }) + "\n")
    write_episodes(run / "episodes" / "step_00001.jsonl", [
        _episode("milk", [_turn(FIRST_ACTION, "Yes.", 0.0, 0.8, "Yes"),
                          _turn("Is it a milk?", "Finished! The answer was milk.", 1.85, 1.2, "Finished")], success=True),
        _episode("taco", [_turn(f"Is it {INJECTED}?", "Invalid question.", -0.5, -0.7, "Invalid"),
                          _turn('Is it "quoted" & <b>bold</b>?<!--', "No.", 0.0, -0.3, "No")]),
    ])
    write_episodes(run / "episodes" / "step_00002.jsonl", [
        _episode("wool", [_turn("Is it a kind of food?", "Repeated question.", -0.1, -0.2, "Repeated")]),
        _episode("milk", [_turn("Is it a milk?", "Finished! The answer was milk.", 1.85, 0.5, "Finished")], success=True),
    ])
    write_episodes(run / "episodes" / "step_00003.jsonl", [
        _episode("rim", [_turn("Is it a rim?", "", 0.0, None, "Invalid")], aborted=True, abort_reason="oracle failed"),
    ])
    (run / "eval.json").write_text(json.dumps({"checkpoint": {
        "mean_at_k": 0.75, "mean_at_k_std": 0.05, "pass_at_k": 1.0, "k": 2, "avg_questions": 4.5}}))
    return run


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


def test_page_embeds_the_run_escaped_and_loads_nothing_from_elsewhere(tmp_path):
    run = make_run(tmp_path)
    path = write_report(run)
    assert path == run / "report.html"
    page = path.read_text(encoding="utf-8")
    # model text cannot close or open a script element or an HTML comment
    assert page.count("<script") == page.count("</script>") == 3
    assert "<!--" not in page
    data = embedded(page)
    assert [r["step"] for r in data["metrics"]] == [1, 2, 3]
    assert data["metrics"][1]["grad_norm"] is None  # NaN would break JSON.parse
    assert [ep["result"] for ep in data["episodes"]] == ["won", "lost", "lost", "won", "aborted"]
    assert data["episodes"][0]["turns"][0]["action_text"] == FIRST_ACTION
    assert INJECTED in data["episodes"][1]["turns"][0]["action_text"]
    assert all("prompt_ids" not in t and "action_ids" not in t and t["tokens"] == 2
               for ep in data["episodes"] for t in ep["turns"])
    assert data["evals"][0]["label"] == "checkpoint"
    links = re.findall(r'\b(?:src|href)\s*=\s*["\']([^"\']*)', page)
    assert links and all(v.startswith("data:") for v in links)
    assert set(re.findall(r"https?://[^\s\"'<>]*", page)) == {SVG_NS}
    assert "@import" not in page and "url(" not in page


def test_large_runs_keep_the_first_episodes_of_every_step(tmp_path):
    run = make_run(tmp_path)
    data = collect(run, max_episodes=3)
    firsts = [(ep["source"], ep["task_id"]) for ep in data["episodes"]]
    assert firsts == [("step 1", "milk"), ("step 2", "wool"), ("step 3", "rim")]
    assert data["episodes_total"] == 5
    assert data["episodes_note"].startswith("Showing 3 of 5 episodes: the first 1 of each step")
    # fewer slots than steps: the steps are spread, first and last kept
    assert [ep["source"] for ep in collect(run, max_episodes=2)["episodes"]] == ["step 1", "step 3"]


def test_a_pipeline_run_shows_its_stage_evaluations_and_eval_episodes(tmp_path):
    pipe = tmp_path / "pipe"
    run = make_run(pipe)
    shutil.move(run, pipe / "rl")
    (pipe / "summary.json").write_text(json.dumps({"stages": {}, "eval": {
        "after SFT": {"mean_at_k": 0.1, "pass_at_k": 0.2, "k": 2, "f1": 0.3}}}))
    write_episodes(pipe / "eval" / "after_SFT.jsonl", [_episode("soda", [_turn("Is it soda?", "No.", 0.0, None, "No")])])
    data = collect(pipe / "rl")
    assert data["run"]["name"] == "pipe/rl"
    evals = [(e["label"], Path(e["source"]).name) for e in data["evals"]]
    assert evals == [("checkpoint", "eval.json"), ("after SFT", "summary.json")]
    assert data["sources"][-1] == "eval: after SFT"
    assert data["episodes"][-1]["task_id"] == "soda"


def test_errors_name_the_path_and_what_was_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "nope"))):
        write_report(tmp_path / "nope")
    pipe = make_run(tmp_path / "pipe").parent
    shutil.move(pipe / "run", pipe / "rl")
    with pytest.raises(FileNotFoundError, match=r"expected .*metrics\.jsonl.*pipeline run keeps its training run in .*rl"):
        write_report(pipe)
    run = make_run(tmp_path)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "reward_mean": \n')
    with pytest.raises(ValueError, match=re.escape(f"{run / 'metrics.jsonl'}:4: not valid JSON")):
        write_report(run)
    (run / "metrics.jsonl").write_text('{"reward_mean": 1.0}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:1: expected a metrics object with a numeric 'step'"):
        write_report(run)


def test_report_command_needs_no_config(tmp_path, capsys):
    run = make_run(tmp_path)
    out = tmp_path / "pages" / "r.html"
    assert main(["report", str(run), "--out", str(out), "--max-episodes", "2"]) == 0
    assert capsys.readouterr().out.strip() == f"report: {out}"
    assert len(embedded(out.read_text(encoding="utf-8"))["episodes"]) == 2
    missing = tmp_path / "no-such-run"
    assert main(["report", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("turncredit: error: ") and str(missing) in err
    with pytest.raises(SystemExit):  # no config, so no KEY=VALUE overrides either
        main(["report", str(run), "train.lr=1"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = capsys.readouterr().out
    assert all(opt in text for opt in ("RUN_DIR", "--out", "--max-episodes"))


# ---------------------------------------------------------------------------- in the browser


@pytest.fixture
def chromium(tmp_path):
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Debian packages chromium, chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (pip install -e .[test])")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--no-first-run", "--disable-quic", "--window-size=1280,1600", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


def test_page_in_chromium_draws_curves_and_shows_a_clicked_episode(tmp_path, chromium):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    d = chromium
    d.get(write_report(make_run(tmp_path)).as_uri())
    root = "document.documentElement"
    WebDriverWait(d, 10).until(lambda d: d.execute_script(f"return {root}.dataset.ready || {root}.dataset.errors"))
    assert d.execute_script(f"return {root}.dataset.errors") is None
    assert [e for e in d.get_log("browser") if e["level"] == "SEVERE"] == []
    assert d.execute_script(f"return {root}.dataset.pwned") is None  # the injected script never ran

    def points(css: str) -> list[int]:
        lines = d.find_elements(By.CSS_SELECTOR, css)
        assert lines, css
        return [len(re.findall(r"[ML]", line.get_attribute("d"))) for line in lines]

    for metric in ("reward_mean", "success_rate", "entropy"):
        assert points(f'svg.curve[data-metric="{metric}"] path.line') == [3]
    assert points('svg.curve[data-metric="kl"] path.line') == [3, 3]
    assert points('svg.curve[data-metric="seconds"] path.line') == [3, 3, 3]
    assert d.find_elements(By.CSS_SELECTOR, 'svg.curve[data-metric="reward_mean"] path.band')
    assert not d.find_elements(By.CSS_SELECTOR, 'svg.curve[data-metric="f1"]')  # no F1 logged
    Select(d.find_element(By.ID, "custom-metric")).select_by_value("grad_norm")
    assert points('#custom-curve[data-metric="grad_norm"] path.line') == [2]  # the NaN step is a gap
    assert d.find_element(By.CSS_SELECTOR, "tr.eval-row").text.startswith("checkpoint 75.0 ± 5.0 % 100.0 %")

    rows = d.find_elements(By.CSS_SELECTOR, "tr.episode")
    assert len(rows) == 5
    rows[0].click()
    turns = d.find_elements(By.CSS_SELECTOR, "#episode-detail li.turn")
    assert len(turns) == 2
    first = turns[0]
    assert first.find_element(By.CSS_SELECTOR, ".action").text == FIRST_ACTION
    assert first.find_element(By.CSS_SELECTOR, ".reply").text == "Yes."
    assert first.find_element(By.CSS_SELECTOR, ".reward").text == "reward 0"
    assert first.find_element(By.CSS_SELECTOR, ".advantage").text == "advantage +0.8"
    assert first.find_element(By.CSS_SELECTOR, ".chip.label").text == "Yes"
    assert "22, 163, 74" in first.get_attribute("style")  # positive advantage: green
    rows[1].click()
    lost = d.find_elements(By.CSS_SELECTOR, "#episode-detail li.turn")[0]
    assert lost.find_element(By.CSS_SELECTOR, ".action").text == f"Is it {INJECTED}?"
    assert "220, 38, 38" in lost.get_attribute("style")  # negative: red

    def shown() -> list[str]:
        return [r.find_elements(By.TAG_NAME, "td")[2].text for r in rows if r.is_displayed()]

    result = Select(d.find_element(By.ID, "filter-result"))
    result.select_by_value("won")
    assert shown() == ["milk", "milk"]
    result.select_by_value("aborted")
    assert shown() == ["rim"]
    assert d.find_element(By.ID, "episode-count").text == "1 of 5 episodes"
    result.select_by_value("")
    Select(d.find_element(By.ID, "filter-source")).select_by_value("step 2")
    assert shown() == ["wool", "milk"]
    d.find_element(By.ID, "filter-task").send_keys("woo")
    assert shown() == ["wool"]

    shot = tmp_path / "report.png"
    assert d.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
