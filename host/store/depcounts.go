package store

import "slices"

// DependencyCounts are the counts a driver's LockDependencies reads beside
// the tasks, inside Update: for each task, its open edges (waiters whose
// edge to it is not settled) and, when it is waiting, the largest depth of
// its own edges. CrowdedDependency and WaiterDepth then answer from them
// without a statement of their own, as the engine calls them right after
// LockDependencies (engine.placeAfter). A driver forgets them when it
// writes edges.
type DependencyCounts struct {
	Tenant      string
	Open, Depth map[string]int
}

// NewDependencyCounts returns empty counts for tenant.
func NewDependencyCounts(tenant string) *DependencyCounts {
	return &DependencyCounts{Tenant: tenant, Open: map[string]int{}, Depth: map[string]int{}}
}

// Covers reports whether the counts hold every one of ids in tenant.
func (c *DependencyCounts) Covers(tenant string, ids []string) bool {
	if c == nil || c.Tenant != tenant {
		return false
	}
	for _, id := range ids {
		if _, ok := c.Open[id]; !ok {
			return false
		}
	}
	return true
}

// Crowded is CrowdedDependency answered from the counts (Covers first).
func (c *DependencyCounts) Crowded(ids []string, limit int) string {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	for _, id := range sorted {
		if c.Open[id] >= limit {
			return id
		}
	}
	return ""
}

// MaxDepth is WaiterDepth answered from the counts (Covers first).
func (c *DependencyCounts) MaxDepth(ids []string) int {
	depth := 0
	for _, id := range ids {
		depth = max(depth, c.Depth[id])
	}
	return depth
}
