package mcpapi

// ResourceWatches is how many watches of subscribed leased resources run.
func (s *Server) ResourceWatches() int64 { return s.resourceWatches.Load() }

// CanceledMessage is canceledMessage, for tests.
var CanceledMessage = canceledMessage

// Sessions is how many live sessions the server keeps.
func (s *Server) Sessions() int {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	return len(s.sessions)
}
