"""What the API does, one module per thing: each validates ownership, does or hands off the work and
returns what the route answers. Imports tasks, services, the ports and the domain; never a stage."""
