"""The gate controller: release a gang's pods only when the whole gang fits."""
