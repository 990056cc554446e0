package svc

type DescribeThingsInput struct {

	// Restricts the list to the thing with this creation token.
	CreationToken *string
}
