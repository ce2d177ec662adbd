"""The WordNet oracle: question forms, normalisation, and the Yes/No/Invalid/Finished rule."""

from __future__ import annotations

import pytest

from turncredit.envs.twenty_questions.oracle import HINT, ORACLES, WordNetOracle
from turncredit.envs.twenty_questions.wordnet import ensure_lf_copy, irregular_plurals, load_wordnet
from turncredit.envs.twenty_questions.words import SecretWord as S

W = {
    "dog": S("dog", "dog.n.01", "animal"),
    "mouse": S("mouse", "mouse.n.01", "animal"),
    "cardinal": S("cardinal", "cardinal.n.04", "animal"),
    "piano": S("piano", "piano.n.01", "artifact"),
    "hammer": S("hammer", "hammer.n.02", "artifact"),  # the hand tool, not WordNet's sense 1
    "guitar": S("guitar", "guitar.n.01", "artifact"),
    "car": S("car", "car.n.01", "artifact"),
    "glasses": S("glasses", "spectacles.n.01", "artifact"),
    "oak": S("oak", "oak.n.02", "plant"),  # the tree
    "apple": S("apple", "apple.n.01", "food"),
    "table_salt": S("salt", "salt.n.02", "food"),
    "chem_salt": S("salt", "salt.n.01", "substance"),
    "sand": S("sand", "sand.n.01", "substance"),
    "canyon": S("canyon", "canyon.n.01", "object"),
    "lip": S("lip", "lip.n.01", "body"),
    "ice_cream": S("ice cream", "ice_cream.n.01", "food"),
}

TABLE = [
    # plain "Is it a/an X?" and hypernyms
    ("Is it an animal?", "dog", "Yes"),
    ("Is it a mammal?", "dog", "Yes"),
    ("Is it a plant?", "dog", "No"),
    ("Is it a rodent?", "mouse", "Yes"),
    ("Is it a bird?", "cardinal", "Yes"),
    ("Is it a tree?", "oak", "Yes"),
    ("Is it a fruit?", "apple", "Yes"),
    ("Is it a vehicle?", "car", "Yes"),
    ("Is it a flower?", "oak", "No"),
    # articles, case, subjects
    ("Is it the animal?", "dog", "Yes"),
    ("IS IT AN ANIMAL?", "dog", "Yes"),
    ("Is this an animal?", "piano", "No"),
    ("Is the secret word a mammal?", "dog", "Yes"),
    # plurals
    ("Are they animals?", "dog", "Yes"),
    ("Are they trees?", "oak", "Yes"),
    ("Are they mammals?", "piano", "No"),
    # multiword categories, incl. plural multiword
    ("Is it a musical instrument?", "piano", "Yes"),
    ("Are they musical instruments?", "guitar", "Yes"),
    ("Is it a stringed instrument?", "guitar", "Yes"),
    ("Is it a keyboard instrument?", "guitar", "No"),
    ("Is it a motor vehicle?", "car", "Yes"),
    ("Is it a wheeled vehicle?", "piano", "No"),
    ("Are they pieces of furniture?", "piano", "No"),
    ("Is it an optical instrument?", "glasses", "Yes"),
    # "kind of" forms
    ("Is it a kind of tool?", "hammer", "Yes"),
    ("Is it a kind of tool?", "piano", "No"),
    ("Is it some kind of animal?", "dog", "Yes"),
    ("Is it a type of canine?", "dog", "Yes"),
    ("Is it a sort of carnivore?", "dog", "Yes"),
    ("Is it a kind of hand tool?", "hammer", "Yes"),
    # lexname aliases and adjective forms
    ("Is it alive?", "oak", "Yes"),
    ("Is it living?", "dog", "Yes"),
    ("Is it a living thing?", "piano", "No"),
    ("Is it something alive?", "piano", "No"),
    ("Is it man-made?", "piano", "Yes"),
    ("Is it man made?", "car", "Yes"),
    ("Is it something man-made?", "dog", "No"),
    ("Is it made by humans?", "hammer", "Yes"),
    ("Is it made by humans?", "dog", "No"),
    ("Is it a man-made object?", "hammer", "Yes"),
    ("Is it an artifact?", "oak", "No"),
    ("Is it edible?", "apple", "Yes"),
    ("Is it something you can eat?", "table_salt", "Yes"),
    ("Is it food?", "table_salt", "Yes"),
    ("Is it food?", "chem_salt", "No"),  # the recorded synset decides, not the word
    ("Is it edible?", "dog", "No"),
    ("Is it a body part?", "lip", "Yes"),
    ("Is it a part of the body?", "lip", "Yes"),
    ("Is it a part of the body?", "dog", "No"),
    ("Is it a substance?", "sand", "Yes"),
    ("Is it a material?", "sand", "Yes"),
    ("Is it a natural object?", "canyon", "Yes"),
    ("Is it an object?", "canyon", "Yes"),
    # Finished: the secret, its plural, its synonyms (equivalent forms)
    ("Is it a dog?", "dog", "Finished"),
    ("Are they dogs?", "dog", "Finished"),
    ("Is it a domestic dog?", "dog", "Finished"),
    ("Are they mice?", "mouse", "Finished"),
    ("Is it an automobile?", "car", "Finished"),
    ("Is it a kind of spectacles?", "glasses", "Finished"),
    ("Is it a pair of glasses?", "glasses", "Finished"),
    ("Is it ice cream?", "ice_cream", "Finished"),
    ("Is it a cat?", "dog", "No"),
    # Invalid: not a category question, or X is not a noun
    ("Does it live in water?", "dog", "Invalid"),
    ("Does it grow on trees?", "apple", "Invalid"),
    ("Can you eat it?", "apple", "Invalid"),
    ("What is it?", "dog", "Invalid"),
    ("Is it xyzzyq?", "dog", "Invalid"),
    ("Is it bigger than a breadbox?", "dog", "Invalid"),
    ("Is it a cat or a mouse?", "dog", "Invalid"),
    ("Is it a kind of qwertyuiop?", "dog", "Invalid"),
]


@pytest.fixture(scope="module")
def oracle() -> WordNetOracle:
    return WordNetOracle()


@pytest.mark.parametrize("question,secret,label", TABLE)
def test_oracle_table(oracle: WordNetOracle, question: str, secret: str, label: str) -> None:
    assert oracle.answer(question, W[secret]).label == label


def test_table_is_broad() -> None:
    labels = [lab for _, _, lab in TABLE]
    assert len(TABLE) >= 40
    assert {"Yes", "No", "Invalid", "Finished"} <= set(labels)


def test_registered_as_wordnet() -> None:
    assert ORACLES.get("wordnet") is WordNetOracle


@pytest.mark.parametrize(
    "question,key",
    [
        ("Is it an animal?", "animal"),
        ("Are they animals?", "animal"),
        ("Is it a kind of animal?", "animal"),
        ("Are they musical instruments?", "musical_instrument"),
        ("Is it alive?", "living_thing"),
        ("Is it a living thing?", "living_thing"),
        ("Is it edible?", "food"),
        ("Is it man-made?", "artifact"),
        ("Is it made by humans?", "artifact"),
        ("Is it an artefact?", "artifact"),
        ("Are they pieces of furniture?", "piece_of_furniture"),
        ("Is it a t-shirt?", "t-shirt"),
        ("Does it bark?", None),
    ],
)
def test_parse_normalises_equivalent_forms(oracle: WordNetOracle, question: str, key: str | None) -> None:
    assert oracle.parse(question) == key


def test_invalid_carries_a_hint_of_accepted_forms(oracle: WordNetOracle) -> None:
    ans = oracle.answer("Does it bark?", W["dog"])
    assert ans.label == "Invalid" and ans.hint == HINT
    assert "Is it an animal?" in ans.hint and "kind of" in ans.hint
    assert oracle.answer("Is it an animal?", W["dog"]).hint == ""


def test_yes_keys_are_the_hypernym_closure(oracle: WordNetOracle) -> None:
    keys = oracle.yes_keys(W["dog"])
    assert {"canine", "carnivore", "mammal", "animal", "organism", "living_thing"} <= keys
    assert "dog" not in keys and "cat" not in keys and "artifact" not in keys


def test_secret_unknown_to_wordnet_is_finished_by_name(oracle: WordNetOracle) -> None:
    odd = S("zorblax", "dog.n.01", "animal")
    assert oracle.answer("Is it a zorblax?", odd).label == "Finished"
    assert oracle.answer("Is it an animal?", odd).label == "Yes"


def test_garbage_never_raises(oracle: WordNetOracle) -> None:
    for q in ["", "?", "Is it ?", "is it a " + "x" * 3000 + "?", "Is it a \x00\u202e?", "Is it a 🐶?", "Is it a-?"]:
        assert oracle.answer(q, W["dog"]).label == "Invalid"


def test_lf_copy_is_atomic_and_converts_line_endings(tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "data.noun").write_bytes(b"line one\r\nline two\r\n")
    (src / "lexnames").write_bytes(b"00\tadj.all\t3\r\n")
    dest = ensure_lf_copy(src, tmp_path / "cache" / "wordnet-3.0")
    assert (dest / "data.noun").read_bytes() == b"line one\nline two\n"
    assert (dest / "lexnames").read_bytes() == b"00\tadj.all\t3\n"
    assert [p.name for p in dest.parent.iterdir()] == ["wordnet-3.0"]  # no temp dir left behind
    (src / "data.noun").write_bytes(b"changed\r\n")
    assert ensure_lf_copy(src, dest) == dest and (dest / "data.noun").read_bytes() == b"line one\nline two\n"


def test_real_wordnet_loads_offline() -> None:
    wn = load_wordnet()
    assert wn is load_wordnet()  # cached
    assert wn.synset("dog.n.01").lexname() == "noun.animal"
    assert wn.morphy("instruments", "n") == "instrument"
    assert "mice" in irregular_plurals()["mouse"]
