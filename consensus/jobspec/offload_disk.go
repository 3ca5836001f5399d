package jobspec

// OffloadDiskReserveMin is the least free space an offload plan leaves on a node's data
// disk, whatever its size: room for the Raft WAL and snapshots, dataset and checkpoint
// blobs, which share that disk and must never meet ENOSPC because of training state.
const OffloadDiskReserveMin = 1 << 30

// OffloadDiskRoom is how many bytes of offloaded training state a data disk with free
// bytes available may take: free less a reserve of max(1 GiB, free/10). The balancer plans
// within it from a node's announced disk_free_bytes, and the node checks it again against
// its disk just before creating an offload store.
func OffloadDiskRoom(free uint64) uint64 {
	reserve := max(uint64(OffloadDiskReserveMin), free/10)
	if free <= reserve {
		return 0
	}
	return free - reserve
}
