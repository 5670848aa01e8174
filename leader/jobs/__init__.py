"""Where jobs are made and checked: the limits a submission meets, a target's fit to its model, and the fleet checks
that create, pin and settle jobs of their own."""
