package enroll

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// enrolments counts what passes did (not dry runs): the outcomes that
// act or fail, so a rule naming a missing Template shows as failures.
var enrolments = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "anvil_enrolments_total",
	Help: "Enrolment attempts by result: enrolled (a rule's workflow was created), commissioning (a machine's commissioning workflow was created) or failed (a rule or the commissioning template matched but the workflow could not be made: missing Template, would not render, store error).",
}, []string{"result"})

func init() {
	for _, r := range []string{Enrolled, Commissioning, Failed} {
		enrolments.WithLabelValues(r)
	}
}
