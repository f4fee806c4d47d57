"""The release: a round's decision carried out, all of a gang's gates removed or none.

`releases` takes a decision to released pods: the room promised in the state first, the
decision recorded, the patches run, the release told (Events), the watch's echo awaited, and
the promises given back when the release fails. `patches` makes the API calls of one release:
the nominations, one dry run per pod shape, one JSON patch per pod (test the uid and the gate,
remove the gate, label, pin, annotate), with retries. `dra_hold` allocates a pinned release's
DRA claims on their planned nodes before its gates go, and gives them back if it does not go ahead.
"""
