#!/usr/bin/env python3
"""Independent computation of DESIGN 5.1's owner functions, with Python's
hashlib, for a few apps and cluster sets. Writes owners_python.json, which
owner_test.go checks the Go code against. Run: python3 owners.py"""
import hashlib, json

def modn(app, ids):
    ids = sorted(set(i.encode() for i in ids))  # bytewise
    if not ids:
        return ""
    n = int.from_bytes(hashlib.sha256(app.encode()).digest()[:4], "big")
    return ids[n % len(ids)].decode()

def rendezvous(app, ids):
    best = None
    for i in ids:
        h = hashlib.sha256((app + "\n" + i).encode()).digest()
        if best is None or h > best[0] or (h == best[0] and i.encode() < best[1].encode()):
            best = (h, i)
    return best[1] if best else ""

sets = [[], ["eu"], ["us", "eu"], ["eu", "us", "ap"], ["ap", "eu", "us", "sa"],
        ["c10", "c9", "c1", "c2", "C3"], ["eu-west", "eu", "eu-2"]]
apps = ["hello", "shop", "a", "0", "my-app-1", "xn--bcher-kva", "z" * 63]
out = [{"app": a, "ids": s, "modn": modn(a, s), "rendezvous": rendezvous(a, s)}
       for s in sets for a in apps]
with open("owners_python.json", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
