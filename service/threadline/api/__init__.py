"""HTTP routes, one router per resource, and the error shape they share."""
