"""Where one gang's pods go: the free capacity a round uses up (capacity), topology domains and the
fewest of them (domains, topology), packing a gang (packing), GPU cards chosen by FGD (gpushare_fgd,
gpushare_round), and why a gang does not fit (explain). Imports core.fit and core.state.
"""
