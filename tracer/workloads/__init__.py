"""Work that makes the kernel run the traced paths: compaction, memcg reclaim, demotion, namespace rebinds."""
