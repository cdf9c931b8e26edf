#!/bin/sh
# prepare-corpus.sh: the training corpus of models/kjv-small, from Debian
# packages.  Downloads bible-kjv-text (the King James Version, 1611:
# public domain) and bible-kjv (its reader, GPL-2+: it decompresses
# the text's own format) with apt-get download, unpacks both with dpkg -x,
# and has the reader print every verse from Genesis 1:1 to Revelation
# 22:21.  Writes into OUTDIR (default .train-corpus, which git ignores):
#
#     kjv.tsv       one verse a line: book, chapter, verse, text (tabs),
#                   the book's name spelled out, runs of spaces made one
#     SOURCES       the packages' names, versions and sha256 sums
#
#     sh tools/train-small/prepare-corpus.sh [OUTDIR]
#
# Needs apt-get (a Debian source list), dpkg and awk; the reader needs
# libreadline8.  tools/train-small/train.py reads kjv.tsv; build.sh runs
# this, the training and the goldens in turn.
set -eu

out=${1:-.train-corpus}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$work"
apt-get download bible-kjv-text bible-kjv >/dev/null
for deb in *.deb; do
    dpkg -x "$deb" root
done

: >"$out/SOURCES"
for deb in *.deb; do
    printf '%s %s %s\n' "$(dpkg-deb -f "$deb" Package)" \
        "$(dpkg-deb -f "$deb" Version)" \
        "$(sha256sum "$deb" | cut -d' ' -f1)" >>"$out/SOURCES"
done

# -f: one verse a line, each after its reference ("Ge1:1 In the ...");
# -p: the text file's folder
root/usr/bin/bible -f -p root/usr/lib 'Gen1:1-Rev22:21' >verses.txt

awk '
BEGIN {
    n = split("Ge Genesis|Exo Exodus|Lev Leviticus|Num Numbers|" \
        "Deu Deuteronomy|Josh Joshua|Jdgs Judges|Ruth Ruth|1Sm 1 Samuel|" \
        "2Sm 2 Samuel|1Ki 1 Kings|2Ki 2 Kings|1Chr 1 Chronicles|" \
        "2Chr 2 Chronicles|Ezra Ezra|Neh Nehemiah|Est Esther|Job Job|" \
        "Psa Psalms|Prv Proverbs|Eccl Ecclesiastes|SSol Song of Solomon|" \
        "Isa Isaiah|Jer Jeremiah|Lam Lamentations|Eze Ezekiel|Dan Daniel|" \
        "Hos Hosea|Joel Joel|Amos Amos|Obad Obadiah|Jonah Jonah|" \
        "Mic Micah|Nahum Nahum|Hab Habakkuk|Zep Zephaniah|Hag Haggai|" \
        "Zec Zechariah|Mal Malachi|Mat Matthew|Mark Mark|Luke Luke|" \
        "John John|Acts Acts|Rom Romans|1Cor 1 Corinthians|" \
        "2Cor 2 Corinthians|Gal Galatians|Eph Ephesians|Phi Philippians|" \
        "Col Colossians|1Th 1 Thessalonians|2Th 2 Thessalonians|" \
        "1Tim 1 Timothy|2Tim 2 Timothy|Titus Titus|Phmn Philemon|" \
        "Heb Hebrews|Jas James|1Pet 1 Peter|2Pet 2 Peter|1Jn 1 John|" \
        "2Jn 2 John|3Jn 3 John|Jude Jude|Rev Revelation", pairs, "|")
    for (i = 1; i <= n; i++) {
        sp = index(pairs[i], " ")
        name[substr(pairs[i], 1, sp - 1)] = substr(pairs[i], sp + 1)
    }
}
{
    if (!match($0, /^[1-3]?[A-Za-z]+/)) {
        print "unexpected line " NR ": " $0 > "/dev/stderr"
        exit 1
    }
    abbr = substr($0, 1, RLENGTH)
    rest = substr($0, RLENGTH + 1)
    if (!(abbr in name) || !match(rest, /^[0-9]+:[0-9]+ /)) {
        print "unexpected line " NR ": " $0 > "/dev/stderr"
        exit 1
    }
    ref = substr(rest, 1, RLENGTH - 1)
    text = substr(rest, RLENGTH + 1)
    gsub(/[ \t]+/, " ", text)
    sub(/ $/, "", text)
    split(ref, cv, ":")
    printf "%s\t%s\t%s\t%s\n", name[abbr], cv[1], cv[2], text
    seen++
}
END {
    if (seen != 31102) {
        print "expected 31102 verses, read " seen > "/dev/stderr"
        exit 1
    }
}' verses.txt >"$out/kjv.tsv"

echo "$out/kjv.tsv: $(wc -l <"$out/kjv.tsv") verses," \
     "$(wc -c <"$out/kjv.tsv") bytes"
cat "$out/SOURCES"
