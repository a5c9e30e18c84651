package mcpapi

// ResourceWatches is how many watches of subscribed leased resources run.
func (s *Server) ResourceWatches() int64 { return s.resourceWatches.Load() }

// CanceledMessage is canceledMessage, for tests.
var CanceledMessage = canceledMessage
