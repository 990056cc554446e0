package svc

import "example.com/svc/types"

type CreateZoneInput struct {

	// The zone's configuration.
	Config *types.ZoneConfig

	// The zone's tags.
	Tags map[string]string
}
