"""A chunk's bytes, both ways: the codec chains a store is written with and decoded by (`codecs`), the
compressor vocabulary the spec checks (`compressors`), and the shard layout with its writer and its index
decoder (`shard`, where the index's "absent" entry is defined, once).

Names are imported from their modules (`labzarr.store.chunks.codecs`); this package imports nothing itself.
"""
