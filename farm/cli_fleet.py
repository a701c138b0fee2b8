"""Fleet commands: head, agent, devices, run. (filled by the farm work)"""
