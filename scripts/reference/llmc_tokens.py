#!/usr/bin/env python3
"""A token file in llm.c's format, of random ids: the data for timing llm.c's train_gpt2cu.

    python3 scripts/reference/llmc_tokens.py train.bin --tokens 524289 [--vocab 50257] [--seed 0]

llm.c's layout (its dev/data/data_common.py and llmc/dataloader.h): a header of 256 little-endian
int32 (magic 20240520, version 1, the token count, then zeros), then the tokens as little-endian
uint16. Ids are uniform below --vocab (GPT-2's 50,257 by default): a speed run does not depend on
the text. Standard library only.
"""
import argparse
import random
import struct
import sys
from array import array


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.tokens <= 0 or not 0 < a.vocab <= 65536:
        sys.exit("llmc_tokens: --tokens must be > 0 and --vocab in 1..65536 (uint16 ids)")
    rng = random.Random(a.seed)
    header = [20240520, 1, a.tokens] + [0] * 253
    tokens = array("H", (rng.randrange(a.vocab) for _ in range(a.tokens)))
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(a.out, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(tokens.tobytes())


if __name__ == "__main__":
    main()
