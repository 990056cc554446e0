package svc

import "example.com/svc/types"

type UpdateZoneInput struct {

	// The zone's configuration.
	Config *types.ZoneConfig
}
