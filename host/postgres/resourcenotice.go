package postgres

import "github.com/asyncgate/asyncgate/host/store"

var (
	_ store.ResourceNotifyTx  = (*writeTx)(nil)
	_ store.DeferredReofferTx = (*writeTx)(nil)
)

// ReofferDeferred implements store.DeferredReofferTx (ReofferWaitingTasks).
func (w *writeTx) ReofferDeferred() {}

// NotifyResourceEnded implements store.ResourceNotifyTx: the notice is sent
// with the transaction's other notifications just before COMMIT, and dropped
// with the request's other writes should it fail.
func (w *writeTx) NotifyResourceEnded(tenant, resource string) {
	w.st.notify = append(w.st.notify, store.ResourceNotice(tenant, resource))
}
