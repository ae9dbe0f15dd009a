"""The store's format: what each JSON document of a store says, each part with one encode and one decode.

| module | owns |
|---|---|
| `index` | the root index of ok items and the array attributes (`StoreIndex`, `IndexItem`, `VolumeAttrs`) |
| `nodes` | every `zarr.json`: the only reader and writer of node documents, always compact |
| `layout` | an array's chunk layout as its `zarr.json` describes it (`Layout`), for the reader |
| `written` | the record of which storage files an array wrote (`StoredFiles`) |
| `ngff` | the OME-Zarr (NGFF 0.5) attributes of image groups |
| `stats` | the statistics records |
| `annotations` | an item's points and boxes in canonical voxels (`Annotation`) |

Names are imported from their modules (`labzarr.store.format.index`); this package imports nothing itself, so
a module that needs one record (or a location that copies a node document last) does not load zarr.
"""

ZARR_JSON = "zarr.json"  # a node's document
