// Package svc is the shape of an aws-sdk-go-v2 service package, for the
// generator's tests.
package svc

// ServiceID is the service's SDK ID.
const ServiceID = "Example Go"
