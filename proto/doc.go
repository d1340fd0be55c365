// Package proto holds ferry's copy of the OpenShell gateway API schema, the
// script that regenerates its Go code (gen.sh) and the tests that keep both
// wire-identical to upstream and in step with each other. The generated
// packages live below it: openshell/v1, openshell/datamodel/v1 and
// openshell/sandbox/v1.
package proto
